package proxy

import (
	"os"

	"golang.org/x/sys/unix"
)

// descriptorsPerConn is what one relayed TCP connection holds: the client's
// and the backend's sockets, and a kernel pipe (two descriptors) for the
// splice of each direction.
const descriptorsPerConn = 6

// descriptorReserve is kept free for everything else the proxy opens while
// it relays: health and metrics connections, the API client, UDP session
// sockets, the iptables commands.
const descriptorReserve = 32

// connectionSlots returns how many TCP connections the userspace relays may
// hold at once within the process's file descriptor limit, given what is
// open already; 0 means no bound (no limit, or it cannot be read).
func connectionSlots() int {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil || lim.Cur == unix.RLIM_INFINITY {
		return 0
	}
	open := 0
	if fds, err := os.ReadDir("/proc/self/fd"); err == nil {
		open = len(fds)
	}
	free := int(min(lim.Cur, 1<<30)) - open - descriptorReserve
	return max(1, free/descriptorsPerConn)
}
