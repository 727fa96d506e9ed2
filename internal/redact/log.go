package redact

import (
	"go.uber.org/zap/buffer"
	"go.uber.org/zap/zapcore"
)

// Encoder returns enc with every line it encodes passed through f before
// it is written: the whole encoded line (message, every field, a stack
// trace), so no field type escapes it, and in the line's own escaping (f
// must find a value as the encoder writes it: JSON escapes a quote).
func Encoder(enc zapcore.Encoder, f func(string) string) zapcore.Encoder {
	return &encoder{Encoder: enc, f: f}
}

type encoder struct {
	zapcore.Encoder
	f func(string) string
}

func (e *encoder) Clone() zapcore.Encoder {
	return &encoder{Encoder: e.Encoder.Clone(), f: e.f}
}

func (e *encoder) EncodeEntry(ent zapcore.Entry, fields []zapcore.Field) (*buffer.Buffer, error) {
	buf, err := e.Encoder.EncodeEntry(ent, fields)
	if err != nil {
		return buf, err
	}
	line := buf.String()
	if out := e.f(line); out != line {
		buf.Reset()
		buf.AppendString(out)
	}
	return buf, nil
}
