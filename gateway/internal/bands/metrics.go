package bands

import "github.com/graygate/graygate/gateway/internal/telemetry"

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

// series returns family{label="value"} with value escaped: band names
// cannot need it; upstream model names are free text.
func series(family, label, value string) string {
	return family + "{" + label + `="` + telemetry.LabelValue(value) + `"}`
}
