"""The course quiz: question bank (``bank``), grading (``engine``, pure) and
attempts in the database (``store``). Imports without Streamlit; the page
only lays out widgets and calls these modules. See README.md for the bank."""
