// Package ca holds the certificate authorities of HTTPS inspection: one
// independent, self-signed root per identity, kept in a CA directory, and
// the short-lived leaf certificates minted from them for inspected hosts.
//
// Why a root per identity, and why independent roots rather than
// intermediates under one egressd root: a sandbox trusts exactly one CA,
// its own, so a leaf minted for one sandbox can never impersonate a host
// to another, even if that sandbox leaks its leaf keys or is handed a
// leaf by mistake. Intermediates under a shared root would not give that
// separation (every sandbox would trust the shared root), and common TLS
// stacks (Python 3.11's among them) will not anchor trust on an
// intermediate, so a sandbox could not trust its intermediate alone.
//
// Root keys live on disk (mode 0600, written atomically, never
// half-written); leaf keys never do: each leaf has a fresh random P-256
// key, is valid for hours, and is cached in memory in a bounded LRU.
//
// A CA directory egressd cannot write holds shared roots (a Kubernetes
// Secret mounted read-only into every replica, made ahead of time): its
// roots are loaded, none is created, and its root-owned keys are accepted
// only with mode 0400 or 0440 in egressd's group.
package ca
