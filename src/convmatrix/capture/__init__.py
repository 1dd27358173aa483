"""Cases from outside the suite (docs/layout: a stage of its own): today the zoo's regeneration
(capture/zoo.py), which records public models with triage/from_model.py's child interpreter."""
