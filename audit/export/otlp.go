package export

import (
	"context"
	"fmt"
	"os"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlplog/otlploghttp"
	otellog "go.opentelemetry.io/otel/log"
	"go.opentelemetry.io/otel/propagation"
	sdklog "go.opentelemetry.io/otel/sdk/log"
	"go.opentelemetry.io/otel/sdk/resource"
	"go.opentelemetry.io/otel/trace"

	"github.com/egressd/egressd/audit"
)

// Attribute keys every exported log record carries (those of an empty
// field are left out). Verify reads them back.
const (
	AttrSeq      = "egressd.audit.seq"
	AttrPrev     = "egressd.audit.prev"
	AttrHash     = "egressd.audit.hash"
	AttrReplica  = "egressd.audit.replica"
	AttrChain    = "egressd.audit.chain"
	AttrKind     = "egressd.audit.kind"
	AttrDecision = "egressd.audit.decision"
	AttrReason   = "egressd.audit.reason"
	AttrRule     = "egressd.audit.rule"
	AttrIdentity = "egressd.audit.identity"
)

// scopeName is the instrumentation scope of the exported log records.
const scopeName = "github.com/egressd/egressd/audit"

// OTLP is the sink that ships records as OTLP logs through the
// OpenTelemetry SDK's log pipeline and its OTLP/HTTP exporter.
type OTLP struct {
	exp    sdklog.Exporter
	prov   *sdklog.LoggerProvider
	logger otellog.Logger
	buf    *collect
}

// NewOTLP returns the OTLP sink, configured from the standard
// OTEL_EXPORTER_OTLP_* variables (endpoint, headers, TLS, timeout,
// compression) and the resource from OTEL_RESOURCE_ATTRIBUTES and
// OTEL_SERVICE_NAME (service.name defaults to "egressd";
// service.instance.id is the replica). opts are added after those, for
// tests. The exporter's own retry is off: the exporter's runner retries
// the whole batch from its cursor.
func NewOTLP(ctx context.Context, replica string, opts ...otlploghttp.Option) (*OTLP, error) {
	if err := checkProtocol(); err != nil {
		return nil, err
	}
	opts = append([]otlploghttp.Option{otlploghttp.WithRetry(otlploghttp.RetryConfig{Enabled: false})}, opts...)
	exp, err := otlploghttp.New(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("otlp exporter: %w", err)
	}
	res, err := resource.Merge(
		resource.NewSchemaless(attribute.String("service.name", "egressd"), attribute.String("service.instance.id", replica)),
		resource.Environment())
	if err != nil {
		return nil, fmt.Errorf("otlp resource: %w", err)
	}
	buf := &collect{}
	prov := sdklog.NewLoggerProvider(sdklog.WithResource(res), sdklog.WithProcessor(buf),
		// The record line is the body; nothing may cut it.
		sdklog.WithAttributeValueLengthLimit(-1))
	return &OTLP{exp: exp, prov: prov, logger: prov.Logger(scopeName), buf: buf}, nil
}

// checkProtocol refuses an OTLP protocol other than the one this sink
// speaks, rather than sending HTTP to a gRPC port.
func checkProtocol() error {
	for _, k := range []string{"OTEL_EXPORTER_OTLP_LOGS_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		if v := os.Getenv(k); v != "" {
			if v != "http/protobuf" {
				return fmt.Errorf("%s=%q: audit.export.otlp speaks http/protobuf only (the collector's port 4318)", k, v)
			}
			return nil
		}
	}
	return nil
}

// Name implements Sink.
func (o *OTLP) Name() string { return "otlp" }

// Export emits the batch through the SDK (which stamps resource and scope)
// and hands the records to the OTLP exporter in one request.
func (o *OTLP) Export(ctx context.Context, batch []Event) error {
	o.buf.recs = o.buf.recs[:0]
	for i := range batch {
		o.emit(ctx, &batch[i])
	}
	if err := o.exp.Export(ctx, o.buf.recs); err != nil {
		return fmt.Errorf("otlp export of seq %d..%d: %w", batch[0].Rec.Seq, batch[len(batch)-1].Rec.Seq, err)
	}
	return nil
}

func (o *OTLP) emit(ctx context.Context, ev *Event) {
	r := &ev.Rec
	var lr otellog.Record
	lr.SetTimestamp(r.TS)
	lr.SetObservedTimestamp(r.TS)
	lr.SetEventName("egressd.audit." + string(r.Kind))
	lr.SetBody(attribute.StringValue(string(ev.Line)))
	sev, text := otellog.SeverityInfo, "INFO"
	if r.Decision == audit.DecisionDeny {
		sev, text = otellog.SeverityWarn, "WARN"
	}
	lr.SetSeverity(sev)
	lr.SetSeverityText(text)
	attrs := []attribute.KeyValue{
		attribute.Int64(AttrSeq, int64(r.Seq)), //nolint:gosec // seq stays far below 2^63
		attribute.String(AttrPrev, r.Prev),
		attribute.String(AttrHash, r.Hash),
		attribute.String(AttrReplica, ev.Replica),
		attribute.String(AttrChain, ev.Chain),
		attribute.String(AttrKind, string(r.Kind)),
	}
	for _, kv := range [...]struct{ k, v string }{
		{AttrDecision, string(r.Decision)}, {AttrReason, r.Reason}, {AttrRule, r.Rule}, {AttrIdentity, r.Identity},
	} {
		if kv.v != "" {
			attrs = append(attrs, attribute.String(kv.k, kv.v))
		}
	}
	lr.AddAttributes(attrs...)
	o.logger.Emit(TraceContext(ctx, r.Traceparent), lr)
}

// TraceContext returns ctx carrying the span context of a W3C traceparent
// header, parsed by OpenTelemetry's own W3C propagator; ctx unchanged when
// tp is empty or not a valid traceparent.
func TraceContext(ctx context.Context, tp string) context.Context {
	if tp == "" {
		return ctx
	}
	return propagation.TraceContext{}.Extract(ctx, propagation.MapCarrier{"traceparent": tp})
}

// Close flushes and shuts the exporter down.
func (o *OTLP) Close(ctx context.Context) error {
	return o.exp.Shutdown(ctx)
}

// collect is the SDK log processor that keeps emitted records for the
// batch being built, so the export's error reaches the runner (the SDK's
// batch processor would drop a failed batch).
type collect struct{ recs []sdklog.Record }

func (c *collect) OnEmit(_ context.Context, r *sdklog.Record) error {
	c.recs = append(c.recs, r.Clone())
	return nil
}

func (c *collect) Enabled(context.Context, sdklog.EnabledParameters) bool { return true }
func (c *collect) Shutdown(context.Context) error                         { return nil }
func (c *collect) ForceFlush(context.Context) error                       { return nil }

// spanContext is the span context of a traceparent (invalid when tp is
// empty or malformed).
func spanContext(tp string) trace.SpanContext {
	return trace.SpanContextFromContext(TraceContext(context.Background(), tp))
}
