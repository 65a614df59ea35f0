package provider

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/captf/captf/test/localcloud/server"
)

// client calls the local cloud's API as a cloud SDK does: it waits out
// throttling (429, honouring Retry-After) and retries server errors with a
// backoff, for as long as terraform's context lasts; other errors, a quota
// among them, are final.
type client struct {
	endpoint, account string
	http              *http.Client
}

// apiError is an answer of the API that is not a success.
type apiError struct {
	Status  int
	Code    string `json:"code"`
	Message string `json:"message"`
}

func (e *apiError) Error() string {
	return fmt.Sprintf("%s: %s (HTTP %d)", e.Code, e.Message, e.Status)
}

func isNotFound(err error) bool {
	ae, ok := err.(*apiError)
	return ok && ae.Status == http.StatusNotFound
}

// apiResource is what the API takes and returns, for any kind: the
// server's own type.
type apiResource = server.Resource

func (c *client) do(ctx context.Context, method, path string, in, out any) error {
	var body []byte
	if in != nil {
		var err error
		if body, err = json.Marshal(in); err != nil {
			return err
		}
	}
	backoff := 200 * time.Millisecond
	for attempt := 0; ; attempt++ {
		req, err := http.NewRequestWithContext(ctx, method, c.endpoint+path, bytes.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+c.account)
		req.Header.Set("Content-Type", "application/json")
		resp, err := c.http.Do(req)
		var wait time.Duration
		switch {
		case err != nil && attempt < 5:
			wait = backoff
		case err != nil:
			return err
		default:
			b, rerr := io.ReadAll(resp.Body)
			resp.Body.Close()
			if rerr != nil {
				return rerr
			}
			switch {
			case resp.StatusCode < 300:
				if out != nil && len(b) > 0 {
					return json.Unmarshal(b, out)
				}
				return nil
			case resp.StatusCode == http.StatusTooManyRequests:
				// Throttled: slow down, never give up while terraform waits.
				wait = backoff
				if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil {
					wait = max(wait, time.Duration(s)*time.Second)
				}
			case resp.StatusCode >= 500 && attempt < 5:
				wait = backoff
			default:
				ae := &apiError{Status: resp.StatusCode}
				if json.Unmarshal(b, ae) != nil || ae.Code == "" {
					ae.Code, ae.Message = http.StatusText(resp.StatusCode), string(b)
				}
				return ae
			}
		}
		backoff = min(2*backoff, 10*time.Second)
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s %s: %w", method, path, ctx.Err())
		case <-time.After(wait):
		}
	}
}

// create makes a resource and waits until it runs.
func (c *client) create(ctx context.Context, kind string, in *apiResource) (*apiResource, error) {
	var out apiResource
	if err := c.do(ctx, http.MethodPost, "/v1/"+kind, in, &out); err != nil {
		return nil, err
	}
	for out.Status == "pending" {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for %s %s: %w", kind, out.ID, ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
		if err := c.do(ctx, http.MethodGet, "/v1/"+kind+"/"+out.ID, nil, &out); err != nil {
			return nil, err
		}
	}
	return &out, nil
}

func (c *client) read(ctx context.Context, kind, id string) (*apiResource, error) {
	var out apiResource
	return &out, c.do(ctx, http.MethodGet, "/v1/"+kind+"/"+id, nil, &out)
}

func (c *client) update(ctx context.Context, kind, id string, name string, tags map[string]string) error {
	if tags == nil {
		tags = map[string]string{}
	}
	return c.do(ctx, http.MethodPatch, "/v1/"+kind+"/"+id, map[string]any{"name": name, "tags": tags}, nil)
}

func (c *client) delete(ctx context.Context, kind, id string) error {
	err := c.do(ctx, http.MethodDelete, "/v1/"+kind+"/"+id, nil, nil)
	if isNotFound(err) {
		return nil
	}
	return err
}
