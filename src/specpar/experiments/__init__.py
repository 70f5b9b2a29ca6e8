"""The DSI paper's experiments (DESIGN layer 1 helpers): offline heatmaps, the online table, the claims report."""
