"""Report stage: view.py gathers what the report shows into a ReportView, render.py renders it as HTML and
writes report.html, terminal.py prints the summary, wording.py holds the sentences both say, charts.py draws
the SVG charts."""
