//go:build !linux

package proxy

func newReadyWaiter() readyWaiter { return goroutineWaiter{} }
