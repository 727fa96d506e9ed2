package policy

// Exported for the external tests of this package only.
var (
	Capabilities = capabilities
	IOBuiltins   = ioBuiltins
)
