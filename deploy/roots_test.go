package deploy

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/egressd/egressd/internal/egressdbin"
)

const (
	rootsSecret    = "egressd-ca"
	rootsConfigMap = "egressd-roots"
	egressdSA      = "egressd"
	identityLabel  = "egressd.dev/identity"
)

// trustEnv are the variables through which a sandbox's tools trust its
// identity's root (issue 25: HTTPS trust out of the box).
var trustEnv = []string{"SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "NODE_EXTRA_CA_CERTS"}

// TestSharedRootsMountedByEveryReplica: every replica of egressd (the
// StatefulSet's pod template, which the autoscaler's replicas share too)
// mounts the Secret egressd-ca read-only as inspect.ca_dir, with
// defaultMode 0440 and fsGroup = egressd's group, the only root-owned key
// shape egressd accepts; no replica has a CA volume of its own.
func TestSharedRootsMountedByEveryReplica(t *testing.T) {
	m := loadManifests(t)
	cfg := m.egressdConfig(t)
	must(t, m.secrets, egressdNS+"/"+rootsSecret)
	sts := must(t, m.statefulSets, egressdNS+"/egressd")
	pod := sts.Spec.Template.Spec

	var vol *corev1.Volume
	for i, v := range pod.Volumes {
		if v.Secret != nil && v.Secret.SecretName == rootsSecret {
			vol = &pod.Volumes[i]
		}
	}
	if vol == nil {
		t.Fatalf("egressd pod volumes %+v; want the Secret %s", pod.Volumes, rootsSecret)
	}
	if dm := vol.Secret.DefaultMode; dm == nil || *dm != 0o440 {
		t.Errorf("Secret %s defaultMode = %s; want 0440 (egressd refuses a root-owned key with any other mode)", rootsSecret, fileMode(dm))
	}
	if isTrue(vol.Secret.Optional) {
		t.Errorf("Secret %s is optional; a replica without the shared roots must not start", rootsSecret)
	}
	sc := pod.SecurityContext
	if sc == nil || sc.FSGroup == nil || sc.RunAsGroup == nil || *sc.FSGroup != *sc.RunAsGroup {
		t.Errorf("egressd pod securityContext %+v; want fsGroup = runAsGroup (egressd's group owns the keys)", sc)
	}
	var mounted bool
	for _, vm := range egressdContainer(t, pod).VolumeMounts {
		if vm.Name == vol.Name {
			mounted = vm.MountPath == cfg.Inspect.CADir && vm.ReadOnly && vm.SubPath == ""
		}
	}
	if !mounted {
		t.Errorf("egressd does not mount volume %s read-only at inspect.ca_dir %s", vol.Name, cfg.Inspect.CADir)
	}
	for _, pvc := range sts.Spec.VolumeClaimTemplates {
		if pvc.Name == vol.Name || pvc.Name == "ca" {
			t.Errorf("volumeClaimTemplates has %q; each replica would mint its own roots", pvc.Name)
		}
	}
	if pod.ServiceAccountName != egressdSA {
		t.Errorf("egressd serviceAccountName = %q; want %s, the one reader RBAC allows", pod.ServiceAccountName, egressdSA)
	}
}

// TestSharedRootsRBAC: the example's RBAC lets egressd's ServiceAccount
// get the Secret egressd-ca and nothing else, and lets no other subject
// read any Secret.
func TestSharedRootsRBAC(t *testing.T) {
	m := loadManifests(t)
	readers := map[string]bool{} // Role names that can read egressd-ca
	for key, r := range m.roles {
		for _, rule := range r.Rules {
			if !slices.Contains(rule.Resources, "secrets") && !slices.Contains(rule.Resources, "*") {
				continue
			}
			if r.Namespace != egressdNS || !slices.Equal(rule.ResourceNames, []string{rootsSecret}) ||
				!slices.Equal(rule.Verbs, []string{"get"}) {
				t.Errorf("Role %s grants %v on secrets %v; want only get on %s in %s", key, rule.Verbs, rule.ResourceNames, rootsSecret, egressdNS)
				continue
			}
			readers[r.Name] = true
		}
	}
	if len(readers) == 0 {
		t.Fatalf("no Role grants get on Secret %s", rootsSecret)
	}
	var bound bool
	for key, b := range m.roleBindings {
		if b.RoleRef.Kind != "Role" || !readers[b.RoleRef.Name] || b.Namespace != egressdNS {
			continue
		}
		for _, s := range b.Subjects {
			if s.Kind != "ServiceAccount" || s.Name != egressdSA || s.Namespace != egressdNS {
				t.Errorf("RoleBinding %s lets %s %s/%s read %s; want only ServiceAccount %s/%s",
					key, s.Kind, s.Namespace, s.Name, rootsSecret, egressdNS, egressdSA)
			}
			bound = bound || s.Kind == "ServiceAccount" && s.Name == egressdSA
		}
	}
	if !bound {
		t.Errorf("no RoleBinding gives ServiceAccount %s/%s the Role that reads %s", egressdNS, egressdSA, rootsSecret)
	}
	must(t, m.accounts, egressdNS+"/"+egressdSA)
}

// TestSandboxTrustsItsRoot: each example sandbox takes its own identity's
// root certificate from the ConfigMap egressd-roots at start (nothing baked
// into the image), and its start step makes a bundle through which a leaf
// egressd mints for that identity verifies and a leaf of another
// identity's root does not, while the image's public roots still do.
func TestSandboxTrustsItsRoot(t *testing.T) {
	m := loadManifests(t)
	must(t, m.configMaps, sandboxNS+"/"+rootsConfigMap)
	for key, d := range m.sandboxes() {
		pod := d.Spec.Template.Spec
		id := d.Spec.Template.Labels[identityLabel]
		var rootVol string
		for _, v := range pod.Volumes {
			if v.ConfigMap != nil && v.ConfigMap.Name == rootsConfigMap {
				if len(v.ConfigMap.Items) != 1 || v.ConfigMap.Items[0].Key != id+".crt" {
					t.Errorf("%s mounts %s items %+v; want only %s.crt, its own identity's root", key, rootsConfigMap, v.ConfigMap.Items, id)
				}
				rootVol = v.Name
			}
		}
		if rootVol == "" {
			t.Errorf("%s does not mount the ConfigMap %s", key, rootsConfigMap)
			continue
		}
		if len(pod.InitContainers) != 1 {
			t.Fatalf("%s init containers %d; want the one that writes the trust bundle", key, len(pod.InitContainers))
		}
		init := pod.InitContainers[0]
		for _, c := range pod.Containers {
			env := map[string]string{}
			for _, e := range c.Env {
				env[e.Name] = e.Value
			}
			for _, v := range trustEnv {
				if env[v] == "" {
					t.Errorf("%s container %s does not set %s", key, c.Name, v)
				}
			}
			// Run the init container's script with its mounts moved to
			// temporary directories, then check the bundle the agent's
			// variables name.
			paths := map[string]string{}
			tmp := t.TempDir()
			for i, vm := range init.VolumeMounts {
				paths[vm.MountPath] = filepath.Join(tmp, "mnt", string(rune('a'+i)))
				if err := os.MkdirAll(paths[vm.MountPath], 0o755); err != nil {
					t.Fatal(err)
				}
				if vm.Name == rootVol {
					writeRoot(t, filepath.Join(paths[vm.MountPath], "root.crt"), tmp, id)
				}
			}
			script := moveMounts(strings.Join(init.Command[2:], " "), paths)
			public := publicRoot(t, tmp)
			script = strings.ReplaceAll(script, "/etc/ssl/certs/ca-certificates.crt", public)
			if out, err := exec.Command(init.Command[0], init.Command[1], script).CombinedOutput(); err != nil {
				t.Fatalf("%s init script: %v\n%s", key, err, out)
			}
			for _, v := range []string{"SSL_CERT_FILE", "REQUESTS_CA_BUNDLE"} {
				checkBundle(t, key+" "+v, moveMounts(env[v], paths), tmp, id, true)
			}
			checkBundle(t, key+" NODE_EXTRA_CA_CERTS", moveMounts(env["NODE_EXTRA_CA_CERTS"], paths), tmp, id, false)
		}
	}
}

// moveMounts rewrites the mount paths in s to where the test put them.
func moveMounts(s string, paths map[string]string) string {
	for from, to := range paths {
		s = strings.ReplaceAll(s, from, to)
	}
	return s
}

// writeRoot writes identity's root certificate, from a CA directory
// under tmp, to path: what roots.sh (or compose's ca-init) exports, made
// by the built binary's `egressd ca export` as roots.sh makes it.
func writeRoot(t *testing.T, path, tmp, identity string) {
	t.Helper()
	cmd := exec.Command(egressdbin.Build(t), "ca", "export", "--ca-dir", filepath.Join(tmp, "ca"), "--identity", identity, "--out", path)
	if _, stderr, code := egressdbin.Output(t, cmd); code != 0 {
		t.Fatalf("egressd ca export --identity %s: exit %d: %s", identity, code, stderr)
	}
}

// publicRoot writes a stand-in for the image's public roots (a root
// egressd made for an identity no sandbox has) and returns its path.
func publicRoot(t *testing.T, tmp string) string {
	t.Helper()
	path := filepath.Join(tmp, "public.crt")
	writeRoot(t, path, tmp, "public-web")
	return path
}

// leafOf signs a server certificate for name with the root and key egressd
// keeps for identity in tmp's CA directory, as an inspected tunnel's leaf
// chains to it. The chain, not how egressd mints, is what a sandbox's trust
// bundle is checked on.
func leafOf(t *testing.T, tmp, identity, name string) *x509.Certificate {
	t.Helper()
	writeRoot(t, filepath.Join(tmp, identity+".export.crt"), tmp, identity)
	root := readPEM(t, filepath.Join(tmp, "ca", identity+".crt"))
	rootCert, err := x509.ParseCertificate(root.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	keyBlock := readPEM(t, filepath.Join(tmp, "ca", identity+".key"))
	rootKey, err := x509.ParsePKCS8PrivateKey(keyBlock.Bytes)
	if err != nil {
		t.Fatalf("%s's root key: %v", identity, err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: name}, DNSNames: []string{name},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, rootCert, &key.PublicKey, rootKey)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return leaf
}

func readPEM(t *testing.T, path string) *pem.Block {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		t.Fatalf("%s holds no PEM block", path)
	}
	return blk
}

// checkBundle checks that the PEM bundle at path lets a leaf of
// identity's root verify and not one of another identity's root, and,
// when withPublic, that it still holds the public roots.
func checkBundle(t *testing.T, what, path, tmp, identity string, withPublic bool) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Errorf("%s: %v", what, err)
		return
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		t.Errorf("%s (%s) holds no certificate", what, path)
		return
	}
	verifies := func(id string) bool {
		_, err := leafOf(t, tmp, id, "api.github.com").Verify(x509.VerifyOptions{DNSName: "api.github.com", Roots: pool})
		return err == nil
	}
	if !verifies(identity) {
		t.Errorf("%s: a leaf of %s's root does not verify; the sandbox would fail on inspected hosts", what, identity)
	}
	if verifies("another-" + identity) {
		t.Errorf("%s: a leaf of another identity's root verifies; a sandbox must trust only its own root", what)
	}
	if got := verifies("public-web"); got != withPublic {
		t.Errorf("%s: the public roots verify = %v; want %v (tunnelled hosts keep their own certificates)", what, got, withPublic)
	}
}

// fileMode formats a manifest's mode for a message.
func fileMode(m *int32) string {
	if m == nil {
		return "unset"
	}
	return fmt.Sprintf("%04o", *m)
}
