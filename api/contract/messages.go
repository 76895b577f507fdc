package contract

import (
	"fmt"
	"strings"
)

// ShortList joins names for an Event or condition message, naming at most
// max of them and counting the rest ("a, b and 3 more"), so a message stays
// readable, and under the API server's length limits, on a large cluster.
func ShortList(names []string, max int) string {
	if len(names) <= max {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:max], ", "), len(names)-max)
}
