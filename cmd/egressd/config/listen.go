package config

import (
	"fmt"
	"net/netip"
)

// validateLoopback refuses an admin address that a sandbox could reach:
// reload and metrics are operator-only.
func validateLoopback(listen string) error {
	ap, err := netip.ParseAddrPort(listen)
	if err != nil {
		return fmt.Errorf("listen must be IP:port, got %q: %w", listen, err)
	}
	if !ap.Addr().IsLoopback() {
		return fmt.Errorf("listen must be a loopback address, got %q", listen)
	}
	return nil
}
