package skills

// EstimateTokens is skillbox's approximate token count of a text, the one
// used for catalog entries, skill bodies, file reads and the catalog
// budget: ceil(UTF-8 bytes / 4). Hosts' tokenizers differ (and none is
// public for every model), so the estimate is deliberately simple and
// stable: about four bytes per token is what byte-pair tokenizers average
// on English prose and code, it over-counts non-Latin scripts (several
// bytes per character) rather than under-counting them, and it is the same
// on every machine and version, so budgets and receipts can be compared.
func EstimateTokens(s string) int {
	return (len(s) + 3) / 4
}
