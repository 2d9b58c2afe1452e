"""The node's ports and adapters: the clock, the receipt codec and its file store, process
identity (`ql3lp1` handles and the `/proc` probe), the launcher and the receipt wrapper."""
