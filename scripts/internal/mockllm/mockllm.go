// Package mockllm drives a running scripts/mockllm upstream from a script:
// it changes the mock's live behaviour in the middle of a drill.
package mockllm

import (
	"context"
	"fmt"
	"net/http"
	"strings"
)

// Configure changes the live settings of the mock upstream at baseURL
// (http://host:port). settings is the JSON object PUT /_mock/config takes,
// {"name": value, …}, where null restores an option's flag value. It blocks
// until the mock answers, and fails unless the answer is 200.
func Configure(ctx context.Context, baseURL, settings string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, baseURL+"/_mock/config", strings.NewReader(settings))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("PUT /_mock/config: %s", resp.Status)
	}
	return nil
}

// DrillArgs returns the flags of a mock upstream in a drill: listening on
// addr, recording nothing, and answering like a small model, 40 ms to the
// headers or the first token and then 2 ms a token. With instant mocks, the
// analyzer's p99 ratio gates would compare milliseconds of scheduling noise
// on a shared machine rather than the upstreams.
func DrillArgs(addr string) []string {
	return []string{"--listen", addr, "--record", "0", "--latency", "40ms", "--ttft", "40ms", "--inter-token", "2ms"}
}
