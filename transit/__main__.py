from transit.cli import main

raise SystemExit(main())
