package main

import (
	"encoding/pem"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"software.sslmate.com/src/go-pkcs12"

	"github.com/egressd/egressd/cmd/egressd/config"
	"github.com/egressd/egressd/internal/identity"
	"github.com/egressd/egressd/proxy/ca"
)

var caActions = map[string]helpText{
	"init": {
		synopsis: []string{"ca init DIR"},
		summary:  "create the CA directory of HTTPS inspection",
		about:    "Create the CA directory DIR (mode 0700). Each identity's root is created in it on first use by serve, or by export.",
		args:     [][2]string{{"DIR", "the directory to create (inspect.ca_dir)"}},
		exit:     "0 created, 1 it could not be created, 2 usage error",
	},
	"export": {
		synopsis: []string{"ca export [--identity ID] [--format pem|pkcs12] [--config FILE | --ca-dir DIR] [--out FILE]"},
		summary:  "write an identity's root certificate for its sandbox to trust",
		about: "Write an identity's root certificate, never its key, creating the root if it does not exist yet: PEM " +
			"(for SSL_CERT_FILE, REQUESTS_CA_BUNDLE, NODE_EXTRA_CA_CERTS, PIP_CERT, GIT_SSL_CAINFO, update-ca-certificates), " +
			"or a PKCS#12 trust store for Java with the password \"changeit\" (the JDK's default; the file holds no secret). " +
			"The directory is --ca-dir, else inspect.ca_dir of --config (default ./egressd-ca). --identity defaults to " +
			"\"anonymous\", every client's identity when no identities are configured.",
		exit: "0 written, 1 the root could not be read or written, 2 usage error",
	},
}

// trustStorePassword is the password of an exported PKCS#12 trust store:
// the JDK's default, so `-Djavax.net.ssl.trustStore=FILE` works without
// a password option. A trust store holds only public certificates.
const trustStorePassword = pkcs12.DefaultPassword

// runCA is `egressd ca init|export`.
func runCA(args []string, stdout, stderr io.Writer) error {
	action, err := groupAction("ca", caActions, "init or export", args, stdout, stderr)
	if err != nil {
		return err
	}
	if action == "init" {
		return runCAInit(args[1:], stdout, stderr)
	}
	return runCAExport(args[1:], stdout, stderr)
}

func runCAInit(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("ca init", flag.ContinueOnError)
	caActions[strings.TrimPrefix(fs.Name(), "ca ")].install(fs)
	pos, err := parseFlags(fs, args, stdout, stderr)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageErrorf("ca init takes one argument, the directory, got %d", len(pos))
	}
	if err := ca.Init(pos[0]); err != nil {
		return err
	}
	_, err = fmt.Fprintf(stdout, "CA directory %s ready; set inspect.ca_dir to it\n", pos[0])
	return err
}

func runCAExport(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("ca export", flag.ContinueOnError)
	caActions[strings.TrimPrefix(fs.Name(), "ca ")].install(fs)
	id := fs.String("identity", identity.Anonymous.ID, "identity `ID` whose root to export")
	format := fs.String("format", "pem", "pem or pkcs12")
	cfgPath := fs.String("config", "", "config `FILE` whose inspect.ca_dir and identities to use")
	caDir := fs.String("ca-dir", "", "CA `DIR` to export from, instead of --config's")
	out := fs.String("out", "", "write to `FILE` (mode 0644) instead of standard output")
	pos, err := parseFlags(fs, args, stdout, stderr)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return usageErrorf("ca export takes no arguments, got %q", pos)
	}
	if *format != "pem" && *format != "pkcs12" {
		return usageErrorf("ca export: --format must be pem or pkcs12, got %q", *format)
	}
	if *cfgPath != "" && *caDir != "" {
		return usageErrorf("ca export: give --config or --ca-dir, not both")
	}
	dir, opts := *caDir, ca.Options{}
	if dir == "" {
		cfg, err := config.Load(*cfgPath)
		if err != nil {
			return usageErrorf("%v", err)
		}
		if err := knownIdentity(cfg, *cfgPath, *id); err != nil {
			return err
		}
		// An identity's configured root is what serve uses, so it is what
		// export gives.
		dir, opts = cfg.Inspect.CADir, cfg.InspectOptions()
	}
	a, err := ca.Open(dir, opts)
	if err != nil {
		return err
	}
	root, err := a.Root(*id)
	if err != nil {
		return err
	}
	var b []byte
	if *format == "pem" {
		b = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: root.Raw})
	} else {
		// Modern2023 (PBES2, AES-256, HMAC-SHA-256): read by OpenSSL 3
		// without -legacy and by Java 12 and later.
		b, err = pkcs12.Modern2023.EncodeTrustStoreEntries([]pkcs12.TrustStoreEntry{
			{Cert: root, FriendlyName: "egressd-" + *id},
		}, trustStorePassword)
		if err != nil {
			return fmt.Errorf("encode trust store: %w", err)
		}
	}
	if *out == "" {
		_, err = stdout.Write(b)
		return err
	}
	if err := os.WriteFile(*out, b, 0o644); err != nil {
		return fmt.Errorf("ca export: %w", err)
	}
	return nil
}

// knownIdentity refuses to create a root for an identity the config does
// not list: a typo would otherwise make a root no sandbox is ever served
// from.
func knownIdentity(cfg *config.Config, cfgPath, id string) error {
	store, err := identity.New(cfg.Identities)
	if err != nil {
		return err
	}
	if store.AllAnonymous() {
		if anon := identity.Anonymous.ID; id != anon {
			return usageErrorf("ca export: the config lists no identities, so every client is %q; "+
				"export --identity %s, or add %q to identities", anon, anon, id)
		}
		return nil
	}
	ids := make([]string, len(cfg.Identities))
	for i, e := range cfg.Identities {
		ids[i] = e.ID
	}
	if !slices.Contains(ids, id) {
		where := "the config"
		if cfgPath != "" {
			where = cfgPath
		}
		return usageErrorf("ca export: identity %q is not in the identities of %s (%v); "+
			"pass one of them, or --ca-dir DIR to export from a directory without a config", id, where, ids)
	}
	return nil
}
