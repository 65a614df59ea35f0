// Package server is the local cloud's API: networks, load balancers and
// instances in accounts, with IDs it assigns, a create latency, per-account
// quotas and a request rate limit, as a real cloud's API has them. Tests,
// the quickstart and the benchmarks run it beside CAPTF; the provider in
// ../provider talks to it.
//
// The API, all JSON, the account named by "Authorization: Bearer ACCOUNT":
//
//	POST   /v1/{kind}          create (201; instances and load balancers are
//	                           "pending" for the create latency, then "running")
//	GET    /v1/{kind}          list the account's
//	GET    /v1/{kind}/{id}     read (404 when gone)
//	PATCH  /v1/{kind}/{id}     change name or tags
//	DELETE /v1/{kind}/{id}     delete (204)
//
// kind is networks, load_balancers or instances. Errors are
// {"code": ..., "message": ...}: 403 QuotaExceeded when a create would pass
// the account's quota, 429 Throttled (with Retry-After) beyond its rate.
//
// Unauthenticated, for tests and operators on loopback:
//
//	GET/PUT /admin/accounts/{account}  an account's limits (Limits)
//	GET     /admin/stats               counts of creates, deletes, refusals
package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Kinds are the resource kinds the cloud has.
var Kinds = []string{"networks", "load_balancers", "instances"}

// Limits are an account's quotas, request rate and create latency.
type Limits struct {
	// Quotas caps the resources of each kind (absent: no cap).
	Quotas map[string]int `json:"quotas,omitempty"`
	// Rate is the requests a second the account may make, Burst how many
	// at once; 0 is no limit.
	Rate  float64 `json:"rate,omitempty"`
	Burst int     `json:"burst,omitempty"`
	// CreateLatency is how long an instance or load balancer is pending.
	CreateLatency Duration `json:"createLatency,omitempty"`
}

// Duration is a time.Duration written as "1.5s".
type Duration time.Duration

func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	v, err := time.ParseDuration(s)
	*d = Duration(v)
	return err
}

// Resource is a network, load balancer or instance.
type Resource struct {
	ID        string            `json:"id"`
	Kind      string            `json:"kind"`
	Account   string            `json:"account"`
	Name      string            `json:"name"`
	NetworkID string            `json:"network_id,omitempty"`
	CIDR      string            `json:"cidr,omitempty"`
	Zone      string            `json:"zone,omitempty"`
	Size      string            `json:"size,omitempty"`
	Port      int               `json:"port,omitempty"`
	UserData  string            `json:"user_data,omitempty"`
	Tags      map[string]string `json:"tags,omitempty"`
	Address   string            `json:"address,omitempty"`
	Status    string            `json:"status"`
	Created   time.Time         `json:"created"`
	readyAt   time.Time
}

// Stats counts what the cloud did, for tests to assert on.
type Stats struct {
	Creates       map[string]int `json:"creates"`
	Deletes       map[string]int `json:"deletes"`
	QuotaRefusals int            `json:"quotaRefusals"`
	Throttled     int            `json:"throttled"`
	Requests      int            `json:"requests"`
}

// Server serves the API. Defaults are the limits of an account nobody set.
type Server struct {
	Defaults Limits
	// StateFile, when set, keeps the resources across restarts.
	StateFile string
	Now       func() time.Time

	mu        sync.Mutex
	resources map[string]*Resource // by ID
	accounts  map[string]*Limits
	buckets   map[string]*bucket
	stats     Stats
	nextID    map[string]int
}

type bucket struct {
	tokens float64
	last   time.Time
}

// persisted is what StateFile holds.
type persisted struct {
	Resources []*Resource        `json:"resources"`
	Accounts  map[string]*Limits `json:"accounts"`
	NextID    map[string]int     `json:"nextID"`
}

// Load reads StateFile, if there is one.
func (s *Server) Load() error {
	s.init()
	if s.StateFile == "" {
		return nil
	}
	b, err := os.ReadFile(s.StateFile)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var p persisted
	if err := json.Unmarshal(b, &p); err != nil {
		return fmt.Errorf("%s: %w", s.StateFile, err)
	}
	for _, r := range p.Resources {
		s.resources[r.ID] = r
	}
	for k, v := range p.Accounts {
		s.accounts[k] = v
	}
	for k, v := range p.NextID {
		s.nextID[k] = v
	}
	return nil
}

func (s *Server) init() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.resources == nil {
		s.resources, s.accounts, s.buckets, s.nextID = map[string]*Resource{}, map[string]*Limits{}, map[string]*bucket{}, map[string]int{}
		s.stats = Stats{Creates: map[string]int{}, Deletes: map[string]int{}}
	}
	if s.Now == nil {
		s.Now = time.Now
	}
}

// save writes StateFile; s.mu is held.
func (s *Server) save() error {
	if s.StateFile == "" {
		return nil
	}
	p := persisted{Accounts: s.accounts, NextID: s.nextID}
	for _, r := range s.resources {
		p.Resources = append(p.Resources, r)
	}
	slices.SortFunc(p.Resources, func(a, b *Resource) int { return strings.Compare(a.ID, b.ID) })
	b, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return err
	}
	tmp := s.StateFile + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, s.StateFile)
}

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.init()
	path := strings.Trim(r.URL.Path, "/")
	parts := strings.Split(path, "/")
	switch {
	case len(parts) == 3 && parts[0] == "admin" && parts[1] == "accounts":
		s.admin(w, r, parts[2])
	case path == "admin/stats":
		s.mu.Lock()
		defer s.mu.Unlock()
		writeJSON(w, http.StatusOK, s.stats)
	case len(parts) >= 2 && parts[0] == "v1" && slices.Contains(Kinds, parts[1]) && len(parts) <= 3:
		s.api(w, r, parts[1], strings.Join(parts[2:], ""))
	default:
		apiError(w, http.StatusNotFound, "NotFound", "no such path: "+r.URL.Path)
	}
}

func (s *Server) admin(w http.ResponseWriter, r *http.Request, account string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch r.Method {
	case http.MethodGet:
		writeJSON(w, http.StatusOK, s.limits(account))
	case http.MethodPut:
		var l Limits
		if err := json.NewDecoder(r.Body).Decode(&l); err != nil {
			apiError(w, http.StatusBadRequest, "BadRequest", err.Error())
			return
		}
		s.accounts[account] = &l
		delete(s.buckets, account)
		if err := s.save(); err != nil {
			apiError(w, http.StatusInternalServerError, "Internal", err.Error())
			return
		}
		writeJSON(w, http.StatusOK, l)
	default:
		apiError(w, http.StatusMethodNotAllowed, "MethodNotAllowed", r.Method)
	}
}

// limits are account's limits; s.mu is held.
func (s *Server) limits(account string) Limits {
	if l, ok := s.accounts[account]; ok {
		return *l
	}
	return s.Defaults
}

func (s *Server) api(w http.ResponseWriter, r *http.Request, kind, id string) {
	account, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || account == "" {
		apiError(w, http.StatusUnauthorized, "Unauthorized", "no account: send Authorization: Bearer ACCOUNT")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stats.Requests++
	if wait, ok := s.allow(account); !ok {
		s.stats.Throttled++
		w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(wait.Seconds()))))
		apiError(w, http.StatusTooManyRequests, "Throttled", fmt.Sprintf("request rate of account %s exceeded: retry after %s", account, wait.Round(time.Millisecond)))
		return
	}
	switch {
	case r.Method == http.MethodPost && id == "":
		s.create(w, r, account, kind)
	case r.Method == http.MethodGet && id == "":
		var list []*Resource
		for _, res := range s.resources {
			if res.Account == account && res.Kind == kind {
				list = append(list, s.view(res))
			}
		}
		slices.SortFunc(list, func(a, b *Resource) int { return strings.Compare(a.ID, b.ID) })
		writeJSON(w, http.StatusOK, list)
	case id == "":
		apiError(w, http.StatusMethodNotAllowed, "MethodNotAllowed", r.Method)
	default:
		res, ok := s.resources[id]
		if !ok || res.Account != account || res.Kind != kind {
			apiError(w, http.StatusNotFound, "NotFound", fmt.Sprintf("%s %s not found", strings.TrimSuffix(kind, "s"), id))
			return
		}
		s.one(w, r, res)
	}
}

func (s *Server) one(w http.ResponseWriter, r *http.Request, res *Resource) {
	switch r.Method {
	case http.MethodGet:
		writeJSON(w, http.StatusOK, s.view(res))
	case http.MethodPatch:
		var change struct {
			Name *string           `json:"name"`
			Tags map[string]string `json:"tags"`
		}
		if err := json.NewDecoder(r.Body).Decode(&change); err != nil {
			apiError(w, http.StatusBadRequest, "BadRequest", err.Error())
			return
		}
		if change.Name != nil {
			res.Name = *change.Name
		}
		if change.Tags != nil {
			res.Tags = change.Tags
		}
		s.respondSaved(w, http.StatusOK, s.view(res))
	case http.MethodDelete:
		delete(s.resources, res.ID)
		s.stats.Deletes[res.Kind]++
		if err := s.save(); err != nil {
			apiError(w, http.StatusInternalServerError, "Internal", err.Error())
			return
		}
		w.WriteHeader(http.StatusNoContent)
	default:
		apiError(w, http.StatusMethodNotAllowed, "MethodNotAllowed", r.Method)
	}
}

func (s *Server) create(w http.ResponseWriter, r *http.Request, account, kind string) {
	var res Resource
	if err := json.NewDecoder(r.Body).Decode(&res); err != nil {
		apiError(w, http.StatusBadRequest, "BadRequest", err.Error())
		return
	}
	if res.Name == "" {
		apiError(w, http.StatusBadRequest, "BadRequest", "name is required")
		return
	}
	if kind != "networks" {
		if n, ok := s.resources[res.NetworkID]; !ok || n.Account != account || n.Kind != "networks" {
			apiError(w, http.StatusBadRequest, "BadRequest", fmt.Sprintf("network %q not found", res.NetworkID))
			return
		}
	}
	limits := s.limits(account)
	if quota, ok := limits.Quotas[kind]; ok {
		used := 0
		for _, o := range s.resources {
			if o.Account == account && o.Kind == kind {
				used++
			}
		}
		if used >= quota {
			s.stats.QuotaRefusals++
			apiError(w, http.StatusForbidden, "QuotaExceeded", fmt.Sprintf("%s quota of %d reached in account %s (%d in use)", strings.TrimSuffix(kind, "s"), quota, account, used))
			return
		}
	}
	s.nextID[kind]++
	prefix := map[string]string{"networks": "net", "load_balancers": "lb", "instances": "i"}[kind]
	res.ID = fmt.Sprintf("%s-%08x", prefix, s.nextID[kind])
	res.Kind, res.Account, res.Created = kind, account, s.Now()
	res.readyAt = res.Created
	res.Status = "running"
	if kind != "networks" {
		res.readyAt = res.Created.Add(time.Duration(limits.CreateLatency))
		res.Address = fmt.Sprintf("10.%d.%d.%d", s.nextID[kind]/65536%256, s.nextID[kind]/256%256, s.nextID[kind]%256)
	}
	s.resources[res.ID] = &res
	s.stats.Creates[kind]++
	s.respondSaved(w, http.StatusCreated, s.view(&res))
}

// view is res as a client sees it now: pending until its create latency
// has passed.
func (s *Server) view(res *Resource) *Resource {
	v := *res
	if s.Now().Before(res.readyAt) {
		v.Status = "pending"
	}
	return &v
}

func (s *Server) respondSaved(w http.ResponseWriter, code int, v any) {
	if err := s.save(); err != nil {
		apiError(w, http.StatusInternalServerError, "Internal", err.Error())
		return
	}
	writeJSON(w, code, v)
}

// allow takes a token from account's bucket, or says how long to wait.
func (s *Server) allow(account string) (time.Duration, bool) {
	l := s.limits(account)
	if l.Rate <= 0 {
		return 0, true
	}
	burst := float64(max(l.Burst, 1))
	now := s.Now()
	b, ok := s.buckets[account]
	if !ok {
		b = &bucket{tokens: burst, last: now}
		s.buckets[account] = b
	}
	b.tokens = min(burst, b.tokens+now.Sub(b.last).Seconds()*l.Rate)
	b.last = now
	if b.tokens < 1 {
		return time.Duration((1 - b.tokens) / l.Rate * float64(time.Second)), false
	}
	b.tokens--
	return 0, true
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func apiError(w http.ResponseWriter, code int, reason, message string) {
	writeJSON(w, code, map[string]string{"code": reason, "message": message})
}
