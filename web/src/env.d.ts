/** esbuild bundles imported stylesheets into the page's one CSS file. */
declare module '*.css';
