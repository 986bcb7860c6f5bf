"""The course quiz: question bank (``bank``), grading (``engine``, pure),
messages and numbers as learners type them (``numbers``, shared by both) and
attempts in the database (``store``, whose ``passed_attempt`` is the one pass
rule, also for certificates). Imports without Streamlit and only ``academy``
below it; the page only lays out widgets and calls these modules. See
README.md for the bank."""
