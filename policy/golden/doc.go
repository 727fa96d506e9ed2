// Package golden holds only tests: the request → decision tables in
// testdata/golden_*.json, checked through the Go API and through the built
// `egressd check`. They decide with policy.PreDial assembled with the real
// address floor, dnsguard.Floor; package policy cannot import dnsguard
// (dnsguard builds on policy), so the tables live here and policy's own
// tests stay free of dnsguard and proxy.
package golden
