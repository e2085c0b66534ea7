package timing

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// CPU is the processor time used by the benchmark's processes: the API
// server and etcd it started, itself (the manager), and its children that
// have ended (the local actions).
type CPU struct {
	APIServer, Etcd, Manager, Actions time.Duration
}

// ReadCPU reads the processor time used so far (Linux).
func ReadCPU() CPU {
	var c CPU
	var self, children syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &self) == nil {
		c.Manager = rusage(self)
	}
	if syscall.Getrusage(syscall.RUSAGE_CHILDREN, &children) == nil {
		c.Actions = rusage(children)
	}
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	parent := strconv.Itoa(os.Getpid())
	for _, path := range stats {
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		// pid (comm) state ppid ... utime stime: fields 14 and 15.
		s := string(b)
		open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || end < open {
			continue
		}
		f := strings.Fields(s[end+1:])
		if len(f) < 13 || f[1] != parent {
			continue
		}
		utime, _ := strconv.ParseInt(f[11], 10, 64)
		stime, _ := strconv.ParseInt(f[12], 10, 64)
		used := time.Duration(utime+stime) * 10 * time.Millisecond // USER_HZ is 100
		switch s[open+1 : end] {
		case "kube-apiserver":
			c.APIServer += used
		case "etcd":
			c.Etcd += used
		}
	}
	return c
}

func rusage(r syscall.Rusage) time.Duration {
	return time.Duration(r.Utime.Nano() + r.Stime.Nano())
}

// Since is the processor time used between an earlier reading and now.
func (c CPU) Since() CPU {
	now := ReadCPU()
	return CPU{
		APIServer: now.APIServer - c.APIServer,
		Etcd:      now.Etcd - c.Etcd,
		Manager:   now.Manager - c.Manager,
		Actions:   now.Actions - c.Actions,
	}
}

// Per is the time per unit of work (transitions), as a line.
func (c CPU) Per(n int) string {
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) / float64(n) }
	total := c.Total()
	return fmt.Sprintf("CPU per transition: API server %.2f ms, etcd %.2f ms, manager and bench %.2f ms, actions %.2f ms (total %.2f ms)",
		ms(c.APIServer), ms(c.Etcd), ms(c.Manager), ms(c.Actions), ms(total))
}

// Total is the processor time of all the processes together.
func (c CPU) Total() time.Duration { return c.APIServer + c.Etcd + c.Manager + c.Actions }
