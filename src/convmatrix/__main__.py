from convmatrix.cli.main import main

raise SystemExit(main())
