// Command pause is the sandbox image of the end-to-end cluster: it holds a
// Pod's namespaces open, doing nothing, until it is told to stop.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	<-stop
}
