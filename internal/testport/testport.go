// Package testport hands out loopback ports to tests, each at most once per
// process, and holds them until the process that is to bind one starts. Every
// test that starts a server (egressd, PostgreSQL, a DNS or HTTP fixture) takes
// its port here, so one registry covers them all.
package testport

import (
	"errors"
	"net"
	"strconv"
	"sync"
)

// handedOut are the ports Free has returned in this process.
var handedOut sync.Map

// Free returns a loopback TCP port that was free a moment ago and that
// no caller in this process was given before: the kernel may offer a
// just-closed port again, and two listeners of one test (a server and a
// gate, or egressd's proxy and DNS listeners) were once given the same one.
// Tests that start servers of their own take ports here too, so that one
// registry covers them all.
//
// The port is free only until someone else binds it: a test that hands it
// to a child process should hold it with Reserve until just before
// the child starts.
func Free() (int, error) {
	r, err := Reserve()
	if err != nil {
		return 0, err
	}
	r.Release()
	return r.Port, nil
}

// Reservation is a loopback TCP port held by a listener of this process
// until Release, so that neither the kernel nor another test can hand it
// out meanwhile.
type Reservation struct {
	Port int
	ln   net.Listener
}

// Reserve binds a loopback port no caller in this process was given
// before (see Free) and holds it.
func Reserve() (*Reservation, error) {
	for range 100 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		port := ln.Addr().(*net.TCPAddr).Port
		if _, dup := handedOut.LoadOrStore(port, true); !dup {
			return &Reservation{Port: port, ln: ln}, nil
		}
		ln.Close()
	}
	return nil, errors.New("testport: the kernel kept offering ports already handed out")
}

// Addr is the reserved address, 127.0.0.1:port.
func (r *Reservation) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(r.Port)) }

// Release frees the port for the process that is to bind it; a second
// call does nothing.
func (r *Reservation) Release() {
	r.ln.Close()
}
