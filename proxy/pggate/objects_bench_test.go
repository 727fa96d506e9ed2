package pggate

import "testing"

// BenchmarkObjectsExtendedCycle is what the object tracking costs one
// pgbench -M prepared transaction: Bind of a prepared statement, Execute,
// Sync, and the server's BindComplete and ReadyForQuery.
func BenchmarkObjectsExtendedCycle(b *testing.B) {
	o := newObjects()
	o.record(objOp{confirm: '1', name: "P0_1", create: true, texts: []string{benchQuery}})
	o.synced()
	o.confirm('1', "")
	o.readyForQuery('I')
	b.ReportAllocs()
	for b.Loop() {
		o.record(objOp{confirm: '2', portal: true, name: "", create: true, texts: o.textsOf(false, "P0_1")})
		o.revokedReason(true, "")
		o.textsOf(true, "")
		o.synced()
		o.confirm('2', "")
		o.readyForQuery('I')
	}
}
