//go:build !linux

package chaos

import "syscall"

// sysProcAttr is empty where there is no parent-death signal: the run's
// own cleanup stops every service it started.
func sysProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{} }
