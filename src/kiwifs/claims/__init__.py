"""Claims on files and episodes, so that no episode is merged twice."""
