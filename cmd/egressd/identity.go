package main

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/egressd/egressd/internal/identity"
)

// runIdentity is `egressd identity hash`: it turns a sandbox's secret, read
// from standard input so it stays out of shell history and ps, into the two
// stored forms an `identities:` entry holds. egressd never stores the secret.
func runIdentity(args []string, stdout, stderr io.Writer) error {
	return runIdentityFrom(os.Stdin, args, stdout, stderr)
}

// identityHashHelp is `egressd identity hash -h`.
var identityHashHelp = helpText{
	synopsis: []string{"identity hash --id ID < SECRETFILE"},
	summary:  "hash a sandbox secret into an identities: entry",
	about: "Read a sandbox's secret from standard input (so it stays out of shell history and ps) and print the identities: entry " +
		"holding its two stored forms: token_sha256 for the proxy, scram_sha256 for the Postgres gate. egressd never stores the secret.",
	args: [][2]string{{"standard input", "the secret, at least 16 characters, on its first line (e.g. openssl rand -hex 24)"}},
	exit: "0 printed, 2 a usage error or a secret too short",
}

func runIdentityFrom(stdin io.Reader, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "hash" {
		help := func(w io.Writer) {
			groupHelp(w, "identity", [][2]string{{"hash", identityHashHelp.summary}}, "the action's own (see its -h); 2 for a usage error")
		}
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help") {
			help(stdout)
			return flag.ErrHelp
		}
		help(stderr)
		return usageErrorf("identity: missing or unknown action; want hash")
	}
	fs := flag.NewFlagSet("identity hash", flag.ContinueOnError)
	identityHashHelp.install(fs)
	id := fs.String("id", "", "sandbox `ID` (the proxy Basic user and the Postgres user)")
	pos, err := parseFlags(fs, args[1:], stdout, stderr)
	if err != nil {
		return err
	}
	if len(pos) != 0 || *id == "" {
		return usageErrorf("identity hash takes --id ID and the secret on standard input")
	}
	line, err := bufio.NewReader(io.LimitReader(stdin, 4096)).ReadString('\n')
	if err != nil && err != io.EOF {
		return fmt.Errorf("read secret: %w", err)
	}
	secret := strings.TrimRight(line, "\r\n")
	if len(secret) < 16 {
		return usageErrorf("identity hash: the secret must be at least 16 characters, got %d", len(secret))
	}
	sum := sha256.Sum256([]byte(secret))
	scram, err := identity.SCRAMVerifier(secret, nil, 0)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(stdout, "- id: %s\n  token_sha256: %s\n  scram_sha256: %q\n", *id, hex.EncodeToString(sum[:]), scram)
	return err
}
