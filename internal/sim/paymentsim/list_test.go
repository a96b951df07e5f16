package paymentsim

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"testing"
	"time"
)

// listPage fetches one page of the charge list.
func listPage(t *testing.T, h http.Handler, query url.Values) (int, listResult) {
	t.Helper()
	w := do(t, t.Context(), h, http.MethodGet, "/v1/charges?"+query.Encode(), nil, "")
	var res listResult
	if w.Code == http.StatusOK {
		if err := json.Unmarshal(w.Body.Bytes(), &res); err != nil || res.Data == nil {
			t.Fatalf("list %s: body %s: want {\"data\": [...], \"has_more\": …} (%v)", query.Encode(), w.Body, err)
		}
	}
	return w.Code, res
}

// TestChargeListPagesByCursor: walked page by page from each page's last
// charge, the list yields every charge once, in the order they were made —
// also a charge made while the walk is under way.
func TestChargeListPagesByCursor(t *testing.T) {
	t.Parallel()
	sim := setup(t, 0)
	var want []string
	for i := range 5 {
		want = append(want, chargeFor(t, sim, fmt.Sprint("key-", i), fmt.Sprint("ord-", i)).ID)
	}
	var got []string
	after := ""
	for pages := 0; ; pages++ {
		q := url.Values{"limit": {"2"}}
		if after != "" {
			q.Set("starting_after", after)
		}
		code, page := listPage(t, sim, q)
		if code != http.StatusOK {
			t.Fatalf("page %d: status %d", pages, code)
		}
		for _, ch := range page.Data {
			got = append(got, ch.ID)
			after = ch.ID
			if ch.Created.IsZero() {
				t.Errorf("charge %s has no created time", ch.ID)
			}
		}
		if pages == 0 { // made while the walk is under way
			want = append(want, chargeFor(t, sim, "key-late", "ord-late").ID)
		}
		if !page.HasMore {
			break
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("walked %v, want every charge once, oldest first: %v", got, want)
	}
}

// TestChargeListFiltersByCreationTime: created_gte leaves out older charges.
func TestChargeListFiltersByCreationTime(t *testing.T) {
	t.Parallel()
	sim := setup(t, 0)
	old := chargeFor(t, sim, "key-old", "ord-old")
	since := old.Created.Add(time.Microsecond)
	for chargeFor(t, sim, "key-new", "ord-new").Created.Before(since) {
		t.Fatal("a later charge was created before an earlier one")
	}
	_, page := listPage(t, sim, url.Values{"created_gte": {since.Format(time.RFC3339Nano)}})
	if len(page.Data) != 1 || page.Data[0].Reference != "ord-new" || page.HasMore {
		t.Errorf("charges created since the first: %+v, want only ord-new", page)
	}
}

// TestChargeListFiltersByAWindowOfCreationTime: created_lte leaves out
// later charges, and with created_gte bounds a window, both ends inclusive.
func TestChargeListFiltersByAWindowOfCreationTime(t *testing.T) {
	t.Parallel()
	sim := setup(t, 0)
	first := chargeFor(t, sim, "key-1", "ord-1")
	second := chargeFor(t, sim, "key-2", "ord-2")
	chargeFor(t, sim, "key-3", "ord-3")
	_, page := listPage(t, sim, url.Values{"created_lte": {second.Created.Format(time.RFC3339Nano)}})
	if len(page.Data) != 2 || page.Data[1].Reference != "ord-2" {
		t.Errorf("charges created until the second: %+v, want ord-1 and ord-2", page)
	}
	_, page = listPage(t, sim, url.Values{
		"created_gte": {second.Created.Format(time.RFC3339Nano)},
		"created_lte": {second.Created.Format(time.RFC3339Nano)},
	})
	if len(page.Data) != 1 || page.Data[0].Reference != "ord-2" || first.Created.Equal(second.Created) {
		t.Errorf("charges created at the second's instant: %+v, want ord-2", page)
	}
}

func TestChargeListRejectsBadQueries(t *testing.T) {
	t.Parallel()
	sim := setup(t, 0)
	for _, q := range []url.Values{
		{"limit": {"0"}}, {"limit": {"101"}}, {"limit": {"ten"}},
		{"created_gte": {"yesterday"}},
		{"created_lte": {"tomorrow"}},
		{"starting_after": {"ch_unknown"}},
		{"order": {"desc"}},
	} {
		if code, _ := listPage(t, sim, q); code != http.StatusBadRequest {
			t.Errorf("list %s: status %d, want 400", q.Encode(), code)
		}
	}
}
