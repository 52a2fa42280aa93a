"""Reading traces against each other: step comparison, tolerances, the cause of a divergence."""
