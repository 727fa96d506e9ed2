package proxy

import "github.com/egressd/egressd/policy"

// urlTarget and connectTarget read the normalized destination out of the
// policy package's facts, so the proxy dials what the policy decided.
func urlTarget(f *policy.URLFacts) Target {
	return Target{Scheme: f.Scheme, Host: f.Host, Port: f.Port, Path: f.Path, Query: f.Query, IP: f.IP}
}

func connectTarget(f *policy.ConnectFacts) Target {
	return Target{Host: f.Host, Port: f.Port, IP: f.IP}
}
