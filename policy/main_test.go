package policy_test

import (
	"flag"
	"os"
	"testing"

	"github.com/egressd/egressd/internal/egressdbin"
)

var update = flag.Bool("update", false, "rewrite generated text (README's reason list) from the code")

// TestMain removes the binary egressdbin.Build built.
func TestMain(m *testing.M) { os.Exit(egressdbin.Main(m)) }
