package bands

import (
	"strings"

	"github.com/graygate/graygate/gateway/internal/telemetry"
)

// Metric families of this package (SPEC §10). Label values come from the
// configuration only: band names and upstream model names.
const (
	bytesPerTokenFamily = "graygate_bytes_per_token"
	bandMatchesFamily   = "graygate_context_band_matches_total"
)

// describe gives tel the # HELP text of this package's families.
func describe(tel *telemetry.Metrics) {
	tel.Describe(bytesPerTokenFamily, "Bytes of request text per prompt token used to estimate requests, by upstream model (4 until learned).")
	tel.Describe(bandMatchesFamily, "Requests whose token estimate matched a context band, by band.")
}

// labelEscaper escapes a label value for the Prometheus text format.
// Band names cannot need it; upstream model names are free text.
var labelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)

// series returns family{label="value"} with value escaped.
func series(family, label, value string) string {
	return family + "{" + label + `="` + labelEscaper.Replace(value) + `"}`
}
