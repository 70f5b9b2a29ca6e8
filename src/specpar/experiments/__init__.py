"""The DSI paper's experiments (docs/design.md, layer 1): offline heatmaps, the online table, the claims report."""
