package e2e

import (
	"io"
	"net/http"
	"net/url"
	"strconv"
)

func itoa(n int) string { return strconv.Itoa(n) }

func urlQueryEscape(s string) string { return url.QueryEscape(s) }

func readAll(resp *http.Response) string {
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}
