package main

import (
	"context"
	"errors"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/klog/v2"
)

// signalContext returns a context that carries logger and is done on
// SIGTERM or SIGINT, and the function that releases the signals.
func signalContext(logger klog.Logger) (context.Context, context.CancelFunc) {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	return klog.NewContext(ctx, logger), stop
}

// startError is a failed start-up step: the cause and the message and
// key-value pairs it is logged with where the role gives up.
type startError struct {
	err error
	msg string
	kv  []any
}

func (e *startError) Error() string { return e.msg + ": " + e.err.Error() }

func (e *startError) Unwrap() error { return e.err }

// startFailed wraps err as a start-up step's failure, logged as msg with
// the key-value pairs kv.
func startFailed(err error, msg string, kv ...any) error {
	return &startError{err: err, msg: msg, kv: kv}
}

// failed logs a start-up step's failure and returns exit status 1.
func failed(logger klog.Logger, err error) int {
	// Name the role's line in the log, not this one.
	logger = logger.WithCallDepth(1)
	if se, ok := errors.AsType[*startError](err); ok {
		logger.Error(se.err, se.msg, se.kv...)
	} else {
		logger.Error(err, "Starting failed")
	}
	return 1
}
