from convmatrix.cli import main

raise SystemExit(main())
