package probespec

import "time"

// The timing of a probe when neither its spec nor its Service sets one: the
// Service-level annotations, standalone mode's configuration and the
// scheduler all default to these.
const (
	DefaultInterval = time.Second
	DefaultRise     = 2
	DefaultFall     = 2
)

// Bounds of a probe's timing. The interval has one lower bound everywhere;
// its upper bound depends on what the value paces, and each is written
// where it applies: interval= here (MaxInterval), the Service-wide
// pulselb.io/probe-interval in contract (MaxProbeInterval), standalone
// mode's interval in standalone (MaxInterval).
const (
	// MinInterval is the shortest probe interval anywhere: shorter ones
	// would load the backends with health checks.
	MinInterval = 100 * time.Millisecond
	// MaxInterval bounds interval= in a spec: one probe of a port may run
	// as seldom as once a day, such as a check of a certificate's expiry
	// (min-valid=).
	MaxInterval = 24 * time.Hour
	// MinTimeout and MaxTimeout bound a probe's timeout= and every other
	// timeout a user gives a single probe (pulselb check --timeout).
	MinTimeout = 10 * time.Millisecond
	MaxTimeout = time.Minute
)
