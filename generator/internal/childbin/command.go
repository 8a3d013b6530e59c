package childbin

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"time"
)

// Signaled is the cause with which a signal cancels idemgen's context
// (cmd/idemgen's Main): a child started by Command is passed that signal.
type Signaled struct{ Signal os.Signal }

func (s Signaled) Error() string { return s.Signal.String() + " signal received" }

// Is makes a context cancelled by a signal one that is context.Canceled,
// as signal.NotifyContext's is.
func (s Signaled) Is(target error) bool { return target == context.Canceled }

// StopDelay is how long a child that was passed a signal has to end
// before it is killed.
const StopDelay = 10 * time.Second

// Command is exec.CommandContext for a child that ends when idemgen ends,
// however idemgen is stopped: when ctx is cancelled the child is passed the
// signal that cancelled it (the Signaled cause; SIGTERM for any other
// cancellation) and killed if it has not ended StopDelay later; and where
// the system has one (Linux) the parent-death signal, SIGTERM, reaches it
// when idemgen is killed outright.
func Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Cancel = func() error {
		if runtime.GOOS == "windows" {
			return cmd.Process.Kill() // no signals to pass on
		}
		var sig os.Signal = syscall.SIGTERM
		var s Signaled
		if errors.As(context.Cause(ctx), &s) {
			sig = s.Signal
		}
		return cmd.Process.Signal(sig)
	}
	cmd.WaitDelay = StopDelay
	diesWithParent(cmd)
	return cmd
}
