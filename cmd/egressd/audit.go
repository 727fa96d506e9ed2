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

// auditPathsArg is the PATH argument of verify and show.
var auditPathsArg = [2]string{"PATH…", "segment files or directories of segments (default: audit.dir of --config, else ./egressd-audit)"}

// auditActions are `egressd audit`'s actions and their -h text.
var auditActions = map[string]helpText{
	"verify": {
		synopsis: []string{"audit verify [flags] [PATH…]"},
		summary:  "check the hash chain, segment links and signed checkpoints",
		about: "Check every record's hash, the chain, seq continuity, segment links, torn lines and checkpoint records, in constant memory. " +
			"A chain cannot show that its tail was cut: --checkpoint and --public-key check it against heads kept elsewhere. " +
			"Several directories are several replicas' logs, each verified and reported on its own line. " +
			"--ocsf and --otlp-json verify exported streams instead (or as well): each replica's chain is recomputed from the embedded record lines, " +
			"and every event's fields are checked against its line; a gap, a reordering or an edit is named.",
		args: [][2]string{auditPathsArg},
		exit: "0 intact, 1 broken (the first bad record is printed as file:line: seq N: what is wrong; per replica or chain with several), 2 unreadable or a usage error",
	},
	"show": {
		synopsis: []string{"audit show [flags] [PATH…]"},
		summary:  "print records, filtered; -f follows the log",
		about: "Print the matching records: an aligned table on a terminal, else (or with --json) the lines exactly as logged. " +
			"Filters combine with AND.",
		args: [][2]string{auditPathsArg},
		exit: "0 printed (also when nothing matched), 2 unreadable or a usage error",
	},
	"explain": auditExplainHelp,
	"keygen": {
		synopsis: []string{"audit keygen --out FILE"},
		summary:  "create a signing key for audit.signing_key",
		about: "Create an Ed25519 key for audit.signing_key (mode 0600) and write its public key, for verify --public-key, " +
			"to FILE.pub and to standard output.",
		exit: "0 written, 2 FILE or FILE.pub exists, cannot be written, or a usage error",
	},
}

// runAudit is `egressd audit verify|show|explain|keygen`.
func runAudit(args []string, stdout, stderr io.Writer) error {
	action, err := groupAction("audit", auditActions, "verify, show, explain or keygen", args, stdout, stderr)
	if err != nil {
		return err
	}
	switch action {
	case "verify":
		return runAuditVerify(args[1:], stdout, stderr)
	case "show":
		return runAuditShow(args[1:], stdout, stderr)
	case "explain":
		return runAuditExplain(args[1:], stdout, stderr)
	default: // keygen
		return runAuditKeygen(args[1:], stdout, stderr)
	}
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
	auditActions["verify"].install(fs)
	pubPath := fs.String("public-key", "", "Ed25519 public key `FILE` (PEM, as audit keygen writes to FILE.pub) that must have signed every checkpoint record")
	var cps checkpointFlags
	fs.Var(&cps, "checkpoint", "`SEQ:HASH` from the operational log's \"audit checkpoint\" lines; the log must match and reach it (repeatable)")
	cfgPath := fs.String("config", "", "config `FILE` whose audit.dir is the default PATH")
	var ocsf, otlpJSON fileList
	fs.Var(&ocsf, "ocsf", "OCSF events `FILE` (audit.export.ocsf) to verify: every replica's chain from the embedded record lines, and each event's fields against its line (repeatable)")
	fs.Var(&otlpJSON, "otlp-json", "OTLP JSON `FILE` (an OpenTelemetry collector's file exporter) to verify like --ocsf (repeatable)")
	pos, err := parseFlags(fs, args, stdout, stderr)
	if err != nil {
		return err
	}
	if len(ocsf)+len(otlpJSON) > 0 && len(pos) == 0 {
		if len(cps) > 0 || *pubPath != "" {
			return usageErrorf("audit verify: --checkpoint and --public-key check a log directory; give it with --ocsf or --otlp-json")
		}
		return exportVerdict(verifyExported(stdout, ocsf, otlpJSON))
	}
	paths, err := auditPaths(pos, *cfgPath)
	if err != nil {
		return err
	}
	var pub ed25519.PublicKey
	if *pubPath != "" {
		if pub, err = audit.LoadPublicKey(*pubPath); err != nil {
			return usageErrorf("%v", err)
		}
	}
	audit.SortCheckpoints(cps)
	newVerifier := func() *audit.Verifier {
		v := audit.NewVerifier()
		v.PublicKey, v.Expect = pub, cps
		return v
	}
	if allDirs(paths) || len(ocsf)+len(otlpJSON) > 0 {
		if len(cps) > 0 && len(paths) > 1 {
			return usageErrorf("audit verify: --checkpoint names one log's heads; give one directory with it")
		}
		ok, err := verifyReplicas(stdout, paths, newVerifier)
		if err != nil {
			return &exitError{code: 2, err: fmt.Errorf("audit verify: %w", err)}
		}
		if len(ocsf)+len(otlpJSON) > 0 {
			okx, err := verifyExported(stdout, ocsf, otlpJSON)
			if err != nil {
				return &exitError{code: 2, err: fmt.Errorf("audit verify: %w", err)}
			}
			ok = ok && okx
		}
		if !ok {
			return &exitError{code: 1, err: errors.New("audit log broken")}
		}
		return nil
	}
	v := newVerifier()
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

// exportVerdict maps verifyExported's result to the exit status.
func exportVerdict(ok bool, err error) error {
	if err != nil {
		return &exitError{code: 2, err: fmt.Errorf("audit verify: %w", err)}
	}
	if !ok {
		return &exitError{code: 1, err: errors.New("exported audit stream broken")}
	}
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
	auditActions["keygen"].install(fs)
	out := fs.String("out", "", "private key `FILE` to create (it must not exist); the public key goes to FILE.pub")
	pos, err := parseFlags(fs, args, stdout, stderr)
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
	pubPEM := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER})
	// The public key first: a key whose public half was never written
	// would sign checkpoints nobody can check.
	pubPath := *out + ".pub"
	if err := writeNew(pubPath, pubPEM, 0o644); err != nil {
		return fmt.Errorf("audit keygen: %w", err)
	}
	if err := writeNew(*out, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: privDER}), 0o600); err != nil {
		os.Remove(pubPath) //nolint:errcheck // undoing a half-made key pair; the write error is the one reported
		return fmt.Errorf("audit keygen: %w", err)
	}
	_, err = stdout.Write(pubPEM)
	return err
}

// writeNew creates path, which must not exist, with b.
func writeNew(path string, b []byte, mode os.FileMode) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, mode)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()       //nolint:errcheck // the write already failed; that error is reported
		os.Remove(path) //nolint:errcheck // removing the partial file; the write error is reported
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		os.Remove(path) //nolint:errcheck // removing the partial file; the close error is reported
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
