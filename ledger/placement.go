package ledger

// Placement is where a store keeps its data, as the store states it: what a caller that keeps
// keys or files of its own beside the ledger, or watches its disk, needs to know, asked instead
// of read from the ledger's address.
type Placement struct {
	// Shared: several instances use the store at once. Whatever one instance seals for the
	// ledger (kept text, queued e-mail, the console's secrets) the others can open only with
	// the same key, and a generation kept while it runs is written while it runs, so that
	// another instance can follow it.
	Shared bool

	// Dir is the directory on this machine that holds the store's files, "" when it has none
	// here (in memory, or a database server's). Nothing else may be kept inside it (a key file
	// there would travel with every backup), and its disk is the one to watch for free space.
	Dir string
}
