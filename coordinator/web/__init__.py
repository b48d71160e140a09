"""The web view of runs and teams: the data a page shows (read from Redis, never written), the
run's DAG and timeline drawn as SVG, the HTML renderer `teamctl report --html` shares with
`teamctl dashboard`, and the dashboard's Starlette app (imported only by that command)."""
