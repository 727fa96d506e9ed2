package defaults

import (
	"fmt"
	"strconv"
)

// Number is what the bound checks of Validate compare: counts, sizes,
// rates and durations.
type Number interface {
	~int | ~int64 | ~float64
}

// The bound checks below return nil when v is in bounds, else an error
// naming key in the wording every section uses, e.g. `queue_size must be
// > 0, got 0` or `timeout must be >= 0, got "-1s"`. A section's Validate
// returns the first failing one (cmp.Or) so a file with two mistakes gets
// the same message on every run.

// Positive checks v > 0.
func Positive[T Number](key string, v T) error {
	if v > 0 {
		return nil
	}
	return fmt.Errorf("%s must be > 0, got %s", key, got(v))
}

// NonNegative checks v >= 0.
func NonNegative[T Number](key string, v T) error {
	if v >= 0 {
		return nil
	}
	return fmt.Errorf("%s must be >= 0, got %s", key, got(v))
}

// AtLeast checks v >= lo.
func AtLeast[T Number](key string, v, lo T) error {
	if v >= lo {
		return nil
	}
	return fmt.Errorf("%s must be >= %v, got %s", key, lo, got(v))
}

// Between checks lo <= v <= hi.
func Between[T Number](key string, v, lo, hi T) error {
	if lo <= v && v <= hi {
		return nil
	}
	return fmt.Errorf("%s must be between %v and %v, got %s", key, lo, hi, got(v))
}

// got shows the offending value: a duration quoted as written in YAML
// ("-1s"), a number as is.
func got(v any) string {
	if s, ok := v.(fmt.Stringer); ok {
		return strconv.Quote(s.String())
	}
	return fmt.Sprint(v)
}
