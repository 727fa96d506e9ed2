//go:build !linux

package main

import (
	"net"

	"go.uber.org/zap"
)

// listenTransparent binds the transparent listener; TPROXY is Linux's, so
// only DNS steering reaches it elsewhere.
func listenTransparent(addr string, _ *zap.Logger) (net.Listener, error) {
	return net.Listen("tcp", addr)
}
