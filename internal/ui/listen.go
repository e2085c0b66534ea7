package ui

import "net"

// listen listens on addr (host:port; port 0 picks a free one).
func listen(addr string) (net.Listener, error) { return net.Listen("tcp", addr) }
