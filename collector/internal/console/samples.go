package console

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gofiber/fiber/v2"

	"github.com/graygate/graygate/collector/internal/store"
	"github.com/graygate/graygate/schemas/events"
)

// samplesPageSize is the console's page of samples (the API allows up to
// store.MaxPage).
const samplesPageSize = 50

type samplesPage struct {
	page
	listing
	Samples []store.SampleSummary
	Reasons []events.SampleReason
}

var sampleParams = []string{"deployment", "reason", "arm", "since", "until", "limit", "cursor"}

// samples is GET /samples: the sample store with the API's filters, newest
// first, in keyset pages.
func (s *Console) samples(c *fiber.Ctx) error {
	if err := onlyParams(c, sampleParams...); err != nil {
		return err
	}
	p := samplesPage{page: s.page(c, "Samples"), listing: readListing(c, sampleParams),
		Reasons: events.SampleReasons}
	p.Nav = "samples"
	f, err := sampleFilter(p.given(), s.now())
	if err != nil {
		return err
	}
	page, err := s.r.ListSamples(c.UserContext(), f)
	if err != nil {
		return err
	}
	p.Samples = page.Samples
	p.pin("since", f.Since)
	p.pin("until", f.Until)
	p.link("/samples", sampleParams, page.NextCursor)
	return s.render(c, fiber.StatusOK, "samples", p)
}

// sampleFilter checks the given filters as /v1/samples does
// (store.ParseSampleFilter); the page is samplesPageSize unless limit
// says otherwise.
func sampleFilter(given map[string]string, now time.Time) (store.SampleFilter, error) {
	f, err := store.ParseSampleFilter(given, now)
	if err != nil {
		return f, err
	}
	return f, pageBounds(f.Cursor, &f.Limit, samplesPageSize)
}

type samplePage struct {
	page
	Sample  store.Sample
	Payload Payload
	Base64  bool
	// Counts says how the failed attempt counts for the gates; Fate what
	// happened to the client's request.
	Counts, Fate string
	// Requests are the stored events of the sample's request id (none
	// when request_log is off or they expired).
	Requests []store.Request
	// Primary is primary's answer of a schema_violation_both sample,
	// shown beside gray's; nil otherwise.
	Primary *Payload
}

// sample is GET /samples/{event_id}: one sample, what became of its
// request, its errors and its payload with the fields they name
// highlighted — for schema_violation_both, primary's answer beside it.
func (s *Console) sample(c *fiber.Ctx) error {
	sm, err := byEventID(c, s.r.Sample)
	if err != nil {
		return err
	}
	p := samplePage{page: s.page(c, "Sample "+sm.EventID), Sample: sm}
	p.Nav = "samples"
	p.Payload = showPayload(sm.Payload, sm.PayloadBase64, sm.PayloadTruncated, sm.ValidationErrors)
	p.Base64 = sm.PayloadBase64 != ""
	if sm.Outcome == string(events.OutcomeSchemaViolationBoth) {
		pp := showPayload(sm.PrimaryPayload, sm.PrimaryPayloadBase64, sm.PrimaryPayloadTruncated, sm.PrimaryValidationErrors)
		if sm.PrimaryPayload == "" && sm.PrimaryPayloadBase64 == "" {
			pp = Payload{Note: "primary's answer was empty or not kept"}
		}
		pp.Anchor = "perr"
		p.Primary = &pp
	}
	if p.Requests, err = s.r.RequestsByID(c.UserContext(), sm.RequestID); err != nil {
		return err
	}
	p.Counts, p.Fate = sampleStory(sm, p.Requests)
	return s.render(c, fiber.StatusOK, "sample", p)
}

// showPayload prepares a stored payload for the page: pretty-printed
// with the fields errs name marked, or as text (base64 when it is not
// UTF-8, cut when it is too big or was cut).
func showPayload(text, b64 string, truncated bool, errs []events.ValidationError) Payload {
	if b64 != "" {
		p := Payload{Text: b64, Note: "not UTF-8: shown as base64"}
		if len(p.Text) > maxPrettyBytes {
			p.Text = p.Text[:maxPrettyBytes]
		}
		return p
	}
	p := preparePayload(text, errs)
	if truncated && p.Lines == nil {
		p.Note = "cut at the sample size limit, so not valid JSON: shown as text"
	}
	return p
}

// sampleStory says how a sample's failed attempt counts for the
// analyzer's gates (from its outcome, or its reason for samples of
// gateways before rev. 3) and what happened to the client's request
// (from the request's stored events when there are any).
func sampleStory(sm store.Sample, reqs []store.Request) (counts, fate string) {
	switch events.Outcome(sm.Outcome) {
	case events.OutcomeSchemaViolation, events.OutcomeInvalidJSON:
		counts = "Gray's answer broke the response contract and primary's answer to the same request passed it: " +
			"a contract failure of gray (gate schema_failure_rate)."
	case events.OutcomeSchemaViolationBoth:
		counts = "Gray's answer broke the response contract, and primary's answer to the same request broke it too " +
			"(or was cut by the client's token limit): the request, not gray, is at fault, so it counts as an attempt " +
			"and never as a failure. Primary's answer is shown beside gray's."
	case events.OutcomeTimeout, events.OutcomeUpstream5xx, events.OutcomeUpstreamError:
		counts = "Gray failed other than by the contract (" + sm.Outcome + "): a gray error (gate gray_error_rate)."
	case "":
		counts = "Gray failed (" + sm.Reason + "); this gateway predates attempt outcomes, so how it counted is not recorded."
	default:
		counts = "Gray's attempt ended " + sm.Outcome + "."
	}
	for _, q := range reqs {
		if q.Arm == events.ArmShadow {
			continue
		}
		switch {
		case sm.Arm == string(events.ArmShadow):
			return counts, "A shadow copy: the client got primary's answer, never gray's. " + requestStory(q)
		case q.Arm == events.ArmGray:
			return counts, fmt.Sprintf("The client got gray's answer (status %d): stream_validation observe relays a stream "+
				"before judging it, so there was no fallback.", q.Status)
		}
		return counts, requestStory(q)
	}
	if sm.Arm == string(events.ArmShadow) {
		return counts, "A shadow copy: the client got primary's answer, never gray's. Its request event is not stored."
	}
	return counts, "In canary mode a failed gray answer falls back to primary; this request's event is not stored " +
		"(gateway.request_log is off, or the event expired), so what the client got is not known here."
}

// deadLettersPageSize is the console's page of dead letters.
const deadLettersPageSize = 50

// maxShownMessage caps the bytes of a dead letter the page shows.
const maxShownMessage = 64 << 10

type deadLetterView struct {
	store.DeadLetter
	Text  string
	Cut   int // bytes not shown
	JSON  bool
	Valid bool // the message was UTF-8
}

type deadLettersPage struct {
	page
	Letters []deadLetterView
	Next    string
	Paged   bool
}

// deadLetters is GET /dead-letters: the messages Postgres refused, newest
// first, each with its error and its content shown as text.
func (s *Console) deadLetters(c *fiber.Ctx) error {
	if err := onlyParams(c, "before"); err != nil {
		return err
	}
	var before int64
	if v := c.Query("before"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 {
			return badParam("before", "want a dead letter id (a whole number, from the page links)")
		}
		before = n
	}
	letters, err := s.r.DeadLetters(c.UserContext(), deadLettersPageSize+1, before)
	if err != nil {
		return err
	}
	p := deadLettersPage{page: s.page(c, "Dead letters"), Paged: before > 0}
	p.Nav = "deadletters"
	if len(letters) > deadLettersPageSize {
		letters = letters[:deadLettersPageSize]
		p.Next = "/dead-letters?before=" + strconv.FormatInt(letters[len(letters)-1].ID, 10)
	}
	for _, d := range letters {
		p.Letters = append(p.Letters, viewDeadLetter(d))
	}
	return s.render(c, fiber.StatusOK, "deadletters", p)
}

// viewDeadLetter prepares a message for showing: indented when it is
// JSON, invalid UTF-8 replaced, cut at maxShownMessage. The page escapes it.
func viewDeadLetter(d store.DeadLetter) deadLetterView {
	v := deadLetterView{DeadLetter: d, Valid: utf8.Valid(d.Message)}
	msg := d.Message
	if len(msg) > maxShownMessage {
		v.Cut = len(msg) - maxShownMessage
		msg = msg[:maxShownMessage]
	}
	var b bytes.Buffer
	if v.Cut == 0 && json.Valid(msg) && json.Indent(&b, msg, "", "  ") == nil {
		v.JSON, v.Text = true, b.String()
		return v
	}
	v.Text = strings.ToValidUTF8(string(msg), "\uFFFD")
	return v
}
