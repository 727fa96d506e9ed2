package export

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/egressd/egressd/audit"
)

// Check is what `serve --check` can tell about cfg without writing or
// connecting: an OTLP protocol this sink speaks, and an OCSF file whose
// directory exists and that, if present, is a regular file.
func Check(cfg audit.ExportConfig) error {
	if cfg.OTLP {
		if err := checkProtocol(); err != nil {
			return fmt.Errorf("audit.export.otlp: %w", err)
		}
	}
	if cfg.OCSF == "" || cfg.OCSF == "-" {
		return nil
	}
	if fi, err := os.Stat(filepath.Dir(cfg.OCSF)); err != nil || !fi.IsDir() {
		return fmt.Errorf("audit.export.ocsf: %s: the directory must exist", cfg.OCSF)
	}
	if fi, err := os.Stat(cfg.OCSF); err == nil && !fi.Mode().IsRegular() {
		return fmt.Errorf("audit.export.ocsf: %s is not a regular file", cfg.OCSF)
	}
	return nil
}
