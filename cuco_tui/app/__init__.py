"""The Textual app: `CucoApp` in app.py, screens/, widgets/, messages.py, cuco.tcss."""
