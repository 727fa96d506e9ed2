package audit

import (
	"context"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// ValidTraceparent reports whether tp is a W3C traceparent header value
// that OpenTelemetry's own W3C propagator accepts (version layout, lower-
// case hex, non-zero trace and span ids): only such a value is recorded
// in Record.Traceparent.
func ValidTraceparent(tp string) bool {
	if tp == "" || len(tp) > maxTraceparent {
		return false
	}
	ctx := propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": tp})
	return trace.SpanContextFromContext(ctx).IsValid()
}

// maxTraceparent bounds the header: version 00 is 55 bytes; a future
// version may append fields, but a record does not carry kilobytes of it.
const maxTraceparent = 128
