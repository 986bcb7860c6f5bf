"""The course quiz: question bank (``bank``), grading (``engine``, pure),
messages and numbers as learners type them (``numbers``, shared by both) and
attempts in the database (``store``, whose ``passed_attempt`` is the one pass
rule, also for certificates). Questions built from a learner's own lab runs:
the figures of a run (``figures``), the templates over them (``templates``)
and the questions stored, shown, graded and audited (``own``). The review
queue scheduled with FSRS (``review``) and how each question performs
(``itemstats``). Imports without Streamlit and only ``academy`` and ``labs``
below it; the pages only lay out widgets and call these modules. See
README.md for the bank and the templates."""
