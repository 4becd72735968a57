package chaos

import "syscall"

// sysProcAttr makes every service die with the chaos run itself, even when
// the run is killed with SIGKILL and cannot clean up: the kernel sends the
// child SIGKILL when its parent thread exits.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
