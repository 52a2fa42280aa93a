"""The typed report and what shows it: terminal, HTML, JSON and CI outputs."""
