"""`kubectl numatopo`: the cluster as the numatopo operator sees it (a kubectl plugin)."""
