package e2e

import (
	"net/url"
	"strconv"
)

func itoa(n int) string { return strconv.Itoa(n) }

func urlQueryEscape(s string) string { return url.QueryEscape(s) }
