package main

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/egressd/egressd/audit"
	"github.com/egressd/egressd/cmd/egressd/config"
)

const auditUsage = `usage:
  egressd audit verify [--public-key FILE] [--checkpoint SEQ:HASH]… [--config FILE] [PATH…]
  egressd audit show [--identity ID] [--decision allow|deny] [--kind K] [--reason R]
                     [--since T] [--until T] [--json|--table] [-f] [--config FILE] [PATH…]
  egressd audit keygen --out FILE

PATH is a segment file or a directory of segments; without one, audit.dir
of --config (default ./egressd-audit).
verify exits 0 when the log is intact, 1 when it is broken (the first bad
record is named), 2 when it cannot be read.
`

// runAudit is `egressd audit verify|show|keygen`.
func runAudit(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprint(stderr, auditUsage)
		if len(args) == 0 {
			return usageErrorf("audit: want verify, show or keygen")
		}
		return flag.ErrHelp
	}
	switch args[0] {
	case "verify":
		return runAuditVerify(args[1:], stdout, stderr)
	case "show":
		return runAuditShow(args[1:], stdout, stderr)
	case "keygen":
		return runAuditKeygen(args[1:], stdout, stderr)
	}
	fmt.Fprint(stderr, auditUsage)
	return usageErrorf("audit: unknown subcommand %q", args[0])
}

// checkpointFlags collects repeated --checkpoint SEQ:HASH values.
type checkpointFlags []audit.Checkpoint

func (c *checkpointFlags) String() string { return fmt.Sprint(*c) }

func (c *checkpointFlags) Set(s string) error {
	seq, hash, ok := strings.Cut(s, ":")
	n, err := strconv.ParseUint(seq, 10, 64)
	if !ok || err != nil || len(hash) != 64 {
		return fmt.Errorf("want SEQ:HASH (a 64-digit hex hash), got %q", s)
	}
	*c = append(*c, audit.Checkpoint{Seq: n, Hash: strings.ToLower(hash)})
	return nil
}

func runAuditVerify(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("audit verify", flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprint(fs.Output(), auditUsage) }
	pubPath := fs.String("public-key", "", "Ed25519 public key (PEM) that must have signed every checkpoint record")
	var cps checkpointFlags
	fs.Var(&cps, "checkpoint", "`SEQ:HASH` from the operational log's \"audit checkpoint\" lines; the log must match and reach it (repeatable)")
	cfgPath := fs.String("config", "", "config file whose audit.dir is the default PATH")
	pos, err := parseFlags(fs, args, stderr)
	if err != nil {
		return err
	}
	paths, err := auditPaths(pos, *cfgPath)
	if err != nil {
		return err
	}
	v := audit.NewVerifier()
	if *pubPath != "" {
		if v.PublicKey, err = audit.LoadPublicKey(*pubPath); err != nil {
			return usageErrorf("%v", err)
		}
	}
	audit.SortCheckpoints(cps)
	v.Expect = cps
	err = v.Paths(paths)
	var be *audit.BreakError
	if errors.As(err, &be) {
		fmt.Fprintf(stdout, "broken: %v\n", be)
		return &exitError{code: 1, err: errors.New("audit log broken")}
	}
	if err != nil {
		return &exitError{code: 2, err: fmt.Errorf("audit verify: %w", err)}
	}
	c := v.Counts
	seq, head := v.Head()
	signed := ""
	if c.Checkpoints > 0 {
		signed = fmt.Sprintf(", %d checkpoints (last at seq %d", c.Checkpoints, c.LastCheckpoint)
		if v.PublicKey != nil {
			signed += ", signatures verified)"
		} else {
			signed += ", signatures not checked: no --public-key)"
		}
	} else if v.PublicKey != nil {
		signed = ", no signed checkpoint to check against --public-key"
	}
	fmt.Fprintf(stdout, "ok: %d records, %d segments, %d files, %d bytes%s; head seq %d hash %s\n",
		c.Records, c.Segments, c.Files, c.Bytes, signed, seq, head)
	return nil
}

// auditPaths returns the positional paths, or audit.dir of the config.
func auditPaths(pos []string, cfgPath string) ([]string, error) {
	if len(pos) > 0 {
		return pos, nil
	}
	cfg, err := config.Load(cfgPath)
	if err != nil {
		return nil, usageErrorf("%v", err)
	}
	return []string{cfg.Audit.Dir}, nil
}

// runAuditKeygen writes a new Ed25519 signing key for audit.signing_key
// (mode 0600) and prints its public key for `verify --public-key`.
func runAuditKeygen(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("audit keygen", flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprint(fs.Output(), auditUsage) }
	out := fs.String("out", "", "private key file to create (it must not exist)")
	pos, err := parseFlags(fs, args, stderr)
	if err != nil {
		return err
	}
	if *out == "" || len(pos) != 0 {
		return usageErrorf("audit keygen: want --out FILE and no arguments")
	}
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return fmt.Errorf("generate key: %w", err)
	}
	privDER, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return fmt.Errorf("encode key: %w", err)
	}
	pubDER, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return fmt.Errorf("encode key: %w", err)
	}
	f, err := os.OpenFile(*out, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("audit keygen: %w", err)
	}
	if err := pem.Encode(f, &pem.Block{Type: "PRIVATE KEY", Bytes: privDER}); err != nil {
		return errors.Join(fmt.Errorf("write %s: %w", *out, err), f.Close())
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", *out, err)
	}
	return pem.Encode(stdout, &pem.Block{Type: "PUBLIC KEY", Bytes: pubDER})
}
