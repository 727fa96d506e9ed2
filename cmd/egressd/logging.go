package main

import (
	"io"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/egressd/egressd/cmd/egressd/config"
	"github.com/egressd/egressd/internal/redact"
)

// newLogger builds the operational logger on w. scrub, if not nil, is
// applied to every encoded line: lines quote what others wrote (net/http
// prints an upstream's bytes), and a brokered secret may be among them.
func newLogger(c config.Log, w io.Writer, scrub func(string) string) (*zap.Logger, error) {
	lvl, err := zapcore.ParseLevel(c.Level)
	if err != nil {
		return nil, err
	}
	ec := zap.NewProductionEncoderConfig()
	ec.EncodeTime = zapcore.RFC3339NanoTimeEncoder
	// "30s", not zap's default 30 (seconds as a bare float): a log
	// reader should not need to know the unit.
	ec.EncodeDuration = zapcore.StringDurationEncoder
	enc := zapcore.NewJSONEncoder(ec)
	if c.Format == "console" {
		enc = zapcore.NewConsoleEncoder(ec)
	}
	if scrub != nil {
		enc = redact.Encoder(enc, scrub)
	}
	return zap.New(zapcore.NewCore(enc, zapcore.Lock(zapcore.AddSync(w)), lvl)), nil
}

// routeStdLog sends the standard library's logger, which net/http and
// x/net print through (an unsolicited response on an idle connection, a
// panic in a handler), to log at warn level, so that those lines are in
// the log's format and scrubbed like every other; each http.Server's
// ErrorLog is made from log already. It returns the undo, for tests and
// the end of serve.
func routeStdLog(log *zap.Logger) func() {
	undo, err := zap.RedirectStdLogAt(log.Named("stdlib"), zapcore.WarnLevel)
	if err != nil {
		// Only an invalid level fails, and warn is valid.
		panic(err)
	}
	return undo
}
