package sqlfacts

import (
	"context"
	"errors"

	"github.com/egressd/egressd/policy"
	"github.com/egressd/egressd/policy/sqlparse"
)

// parserError is the deny for an error of package sqlparse: invalid SQL
// and a crashed or abandoned parse deny sql_parse_error (a crash is what
// the text would have done to the gate), a tree past the worker's bounds
// sql_too_complex.
func parserError(err error) error {
	switch {
	case errors.Is(err, sqlparse.ErrTooLarge):
		return &policy.DenyError{Reason: policy.ReasonSQLTooComplex, Detail: "parse tree too large", Err: err}
	case errors.Is(err, sqlparse.ErrCrashed):
		return &policy.DenyError{Reason: policy.ReasonSQLParseError, Detail: "parser crashed", Err: err}
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return &policy.DenyError{Reason: policy.ReasonSQLParseError, Detail: "parse abandoned", Err: err}
	}
	return parseError(err)
}
